package main

import (
	"runtime"

	"github.com/go-logr/logr"
)

func logrDiscard() logr.Logger { return logr.Discard() }

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }
