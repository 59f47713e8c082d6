"""Paths kept only to read what an earlier release wrote (each says which release may delete it)."""
