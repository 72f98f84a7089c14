// Package amx asks the operating system for permission to use AMX tile
// data (Intel Advanced Matrix Extensions), which Linux grants per process
// before the first tile instruction: without it, LDTILECFG faults.
package amx
