"""Test and demo helpers that stand in for outside services (a scripted model endpoint)."""
