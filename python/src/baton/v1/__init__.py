"""baton's wire types and stubs, generated from proto/baton/v1/baton.proto at build time."""
