package main

import (
	"runtime"

	"github.com/go-logr/logr"
)

func logrDiscard() logr.Logger { return logr.Discard() }

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }

func heapAfterGC() uint64 {
	var mem runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&mem)
	return mem.HeapAlloc
}
