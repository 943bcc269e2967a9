"""Inputs the examples (quickstart.py) write for themselves: not part of the installed package."""
