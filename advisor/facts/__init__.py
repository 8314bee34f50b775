"""The host's facts and their readers: /proc, /sys, /etc through a SysRoot; pools, THP and its rules per mapping, boot configuration, cgroups, NUMA, processes, containers' roots, probes."""
