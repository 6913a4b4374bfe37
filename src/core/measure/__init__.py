"""Measuring one cell: the streaming client, steady state, reconciliation, window metrics, histograms."""
