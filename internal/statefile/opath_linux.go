package statefile

// oPath is Linux's O_PATH (the syscall package lacks it): a descriptor
// to fstat, which needs no read permission on the directory.
const oPath = 0o10000000
