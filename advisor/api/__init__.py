"""The engine API: the report's model, profiles, the Engine base class and its registry."""
