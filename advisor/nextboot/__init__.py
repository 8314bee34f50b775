"""Next-boot knobs: what each knob will be at the next boot and who sets it, and where apply persists each."""
