# Stock trixie 6.12: disks, subchannels and data integrity (see tests/disk-integrity.sh).
KERNEL=debian-6.12
. "$(dirname "$0")/../disk-integrity.sh"
