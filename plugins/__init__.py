"""Built-in engines. Each registers through the `hpadvise.engines` entry point group."""
