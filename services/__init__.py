"""Cheems services: each a package of pure logic modules plus a thin server adapter."""
