# Stock bookworm 6.1: disks, subchannels and data integrity (see tests/disk-integrity.sh).
KERNEL=debian-6.1
. "$(dirname "$0")/../disk-integrity.sh"
