"""Hardware profiles: the schema (units in key names, a source for every number) and loading."""
