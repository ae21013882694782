#!/bin/bash
# Device side, one call per carried TF part: keep it in /tmp/tfparts for setup.sh.
mkdir -p /tmp/tfparts && cp -f "$(dirname "$0")"/part_* /tmp/tfparts/ 2>/dev/null; ls -la /tmp/tfparts | tail -n +2
