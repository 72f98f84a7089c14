//go:build !linux

package model

import (
	"errors"
	"os"
)

// packCacheSupported reports whether the packed-weight cache works here:
// only on Linux, where it maps files for writing and reserves their
// blocks.
const packCacheSupported = false

var errNoPackCache = errors.New("no packed-weight cache on this system")

func mapPackFile(*os.File, int64) ([]byte, error)                   { return nil, errNoPackCache }
func allocPackRegion(*os.File, int64, int64, int64) ([]byte, error) { return nil, errNoPackCache }
func reservePackFile(*os.File, int64)                               {}
func freeBytes(string) (int64, error)                               { return 0, errNoPackCache }
func unmapPack([]byte) error                                        { return nil }
