"""pairwall lab: the pair in network namespaces, traffic, drills."""
