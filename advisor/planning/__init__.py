"""The plan: read the host and the instances (pipeline), choose page sizes, pools, THP modes, the host's findings."""
