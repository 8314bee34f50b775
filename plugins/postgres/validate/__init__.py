"""PostgreSQL under validate and capture: the server handle (scratch clusters, a running
cluster, copies of one), where its data comes from, the workload capture and its replay."""
