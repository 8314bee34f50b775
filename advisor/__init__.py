"""hpadvise: a database-focused huge page tuning advisor."""
