"""Configuration: the typed scenario and its policy registries, YAML read with line
numbers, located errors, units, the shipped profiles, where input files may be read from,
and the checks that run before anything is simulated."""
