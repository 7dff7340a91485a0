"""Mock pieces for AMD GPUs: the RDNA3 (gfx1100) machine-code emulator lives in `rdna3`."""
