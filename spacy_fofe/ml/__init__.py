"""The FOFENER architecture: fragments, FOFE codes at every position, the first layer on positions, the scorer."""
