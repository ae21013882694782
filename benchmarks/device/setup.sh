#!/bin/bash
# Device side, once per machine (about 20 s): TF 2.21 (cp312) from the parts stashed in /tmp/tfparts,
# the small wheels, libcudart 12, and CUDA 13 cuBLAS/cuDNN from the image under the
# sonames TF 2.21 (built for CUDA 12.5) opens, CUPTI too. Then: source /tmp/tfenv.sh
set -euo pipefail
G=$(cd "$(dirname "$0")" && pwd)              # the carried .gpu folder
REPO=$(cd "$G/.." && pwd)                     # the repo root: tfseg, benchmarks, tests
mkdir -p /tmp/tfparts /tmp/site /tmp/cudalib /tmp/nvcache
cp -f "$G"/part_* /tmp/tfparts/ 2>/dev/null || true
[ "$(cat /tmp/tfparts/part_* | sha256sum | cut -c1-64)" = "$(cat "$G/tf.sha256")" ] || { echo "TF parts incomplete:"; ls -la /tmp/tfparts; exit 3; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$G"/small/*.whl
# The image has no zstd binary: the zstandard wheel decompresses (a 2 GiB window for --long=31).
cat /tmp/tfparts/part_* | PYTHONPATH=/tmp/site python3 -c "import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" | tar -x -C /tmp/site
cp -f "$G"/stubs/*.so.* /tmp/cudalib/    # libcudart 12; cuFFT/cuSOLVER/cuSPARSE stubs: dlopen only
ROOTS="/usr/local /opt /usr/lib /usr/lib64"
DIRS=""
link() { local f; f=$(find $ROOTS \( -name "$1" -o -name "$1.*" \) 2>/dev/null | head -1)
         if [ -n "$f" ]; then ln -sf "$f" /tmp/cudalib/$2; DIRS="$DIRS:$(dirname "$f")"; echo "$2 -> $f"
         else echo "MISSING $1"; return 1; fi; }
link libcublas.so.12 libcublas.so.12 || link libcublas.so.13 libcublas.so.12 || true
link libcublasLt.so.12 libcublasLt.so.12 || link libcublasLt.so.13 libcublasLt.so.12 || true
# CUPTI, for the profiled step (tfseg.profile.timeline): without it the trace has no GPU plane.
link libcupti.so.12 libcupti.so.12 || link libcupti.so.13 libcupti.so.12 || true
c=$(find $ROOTS -name 'libcudnn.so.9*' 2>/dev/null | head -1); d=${c:+$(dirname "$c")}; echo "cuDNN: ${c:-MISSING}"
cat > /tmp/tfenv.sh <<ENV
export PYTHONPATH=$REPO:/tmp/site LD_LIBRARY_PATH=/tmp/cudalib${d:+:$d}$DIRS:\${LD_LIBRARY_PATH:-}
export CUDA_CACHE_PATH=/tmp/nvcache CUDA_CACHE_MAXSIZE=4294967296 TF_CPP_MIN_LOG_LEVEL=1 PYTHONUNBUFFERED=1
ENV
echo setup done
