"""The machine layer: every boot of the project goes through it.

guest.Guest describes a guest (kernel, modules, vCPUs, memory, controllers, disks with their
properties as values, extra QEMU arguments, the command); machine.Machine boots one under our
QEMU with QEMU's own qemu.machine and qemu.qmp, watches its console, kernel log and heartbeat,
enforces its clocks, reads its results channel and talks QMP; cli is ./hvstor boot.
"""
