"""Stage five, schedule: pipeline stages and placement on devices, memory per device, roll-up."""
