"""Helpers for the end-to-end suite: kubectl, Redis through a port-forward, task accounting."""
