"""Helpers for testing eagle-hal and its backends: tiny random models with known behaviour."""
