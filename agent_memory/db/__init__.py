"""PostgreSQL: where it is, its schema, and the repositories that read and write it."""
