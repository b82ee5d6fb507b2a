"""The run store: every recorded run in a database (SQLite by default, PostgreSQL for a team), its trends.

schema (tables, migrations, opening a store), record (one run -> one row), trend (slices across revisions,
regressions), chart (the trend line). Loaded lazily by mapper/__init__.py: SQLAlchemy is heavy.
"""
