"""Helpers for the experiments of individual chapters (one module per chapter)."""
