//go:build !nvmlmock

package main

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// nvmlLibrary is the real NVML, loaded at run time (no driver: no GPUs, and
// the agent says why).
func nvmlLibrary() nvml.Interface { return nvml.New() }
