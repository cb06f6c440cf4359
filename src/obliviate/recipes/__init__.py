"""End-to-end runs composed from the package's components."""
