"""Helpers shared by the tests and ``rt demo``: local clusters, certificates, checks."""
