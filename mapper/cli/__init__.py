"""The command line: a client of the public API (`mapper ...`)."""
