#!/bin/bash
# Whether runtime 1 GiB pages can still be had while the two-node guest runs beside: start the
# guest's tests, then run this. While the guest's QEMU (process name numa-lab-guest) runs, it
# compacts memory, asks for 3 x 1 GiB pages, reads what the kernel granted and gives them back,
# every 10 s; MemFree says how much memory the guest has taken meanwhile.
#   HPADVISE_TESTS_BESIDE_HOST=1 .venv/bin/python -m pytest -n 0 tests/integration/test_numa_guest.py &
#   lab/gigantic_beside_guest.sh
f=/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages
for _ in $(seq 1 200); do pgrep -x numa-lab-guest >/dev/null && break; sleep 1; done
echo "guest up at $(date +%T); MemFree $(awk '/MemFree/{print $2}' /proc/meminfo) kB"
while pgrep -x numa-lab-guest >/dev/null; do
  echo 1 > /proc/sys/vm/compact_memory
  echo 3 > $f; got=$(cat $f); echo 0 > $f
  echo "$(date +%T) granted $got of 3; MemFree $(awk '/MemFree/{print $2}' /proc/meminfo) kB"
  sleep 10
done
echo "guest gone at $(date +%T); 1 GiB pool $(cat $f)"
