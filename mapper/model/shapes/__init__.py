"""Shape rules: op type -> output shapes and dtypes, one registry (`base.RULES`)."""
