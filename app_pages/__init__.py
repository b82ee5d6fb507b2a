"""The dashboard's pages (one file each) and their shared helpers (state, cache, ui)."""
