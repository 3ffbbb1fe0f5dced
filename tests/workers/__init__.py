"""Handler modules the worker tests run, and helpers to drive worker processes."""
