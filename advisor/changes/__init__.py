"""What a change is: actions with get/set/verify/restore (sysfs, files, pools per node, gigantic pages, a server's THP mode, scratch directories)."""
