"""Persistence of coordinator metadata: the MetadataStore protocol and its implementations."""
