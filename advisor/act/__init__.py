"""Apply and rollback: the plan's steps, their persistence for boot, the journaled run of them."""
