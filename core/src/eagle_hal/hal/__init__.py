"""The hardware contract a backend fulfils: attention, graphs, sampling ops, KV layout."""
