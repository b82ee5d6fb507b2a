"""The mapping document and the sheet (XLSX, CSV, JSON, HTML) with its charts; one table writer."""
