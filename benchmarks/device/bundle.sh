#!/bin/bash
# CPU side, no device time (about 30 minutes on 2 loaded cores): everything a lent GPU machine needs
# to run tfseg, which its image lacks (TensorFlow, Keras), in parts a device call can carry
# (64 MiB a call, working tree included).
#   DEST/part_00..04  TF 2.21 cp312, the wheel unpacked without tensorflow/include,
#                     tar | zstd -19 --long=31, 61 MiB parts, with DEST/tf.sha256
#   DEST/small/       keras and the small wheels TF needs, zstandard (the image has no zstd
#                     binary)
#   DEST/stubs/       libcudart 12, and empty cuFFT/cuSOLVER/cuSPARSE libraries: TF opens them,
#                     tfseg uses none
#   DEST/*.sh         stash.sh and setup.sh from beside this file
# usage, in the repo root:  echo /.gpu/ >> .git/info/exclude; bash benchmarks/device/bundle.sh .gpu
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd); DEST=${1:?dest}; mkdir -p "$DEST/small" "$DEST/stubs"
WORK=$(mktemp -d)
PIP="python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64"
$PIP -d "$WORK" tensorflow==2.21.0
$PIP -d "$DEST/small" keras==3.15.1 namex optree gast astunparse termcolor google-pasta \
  "protobuf>=6.31.1,<8" "ml_dtypes>=0.5.1,<1" "flatbuffers>=25.9.23" zstandard \
  tensorboard==2.21.0
$PIP -d "$WORK" "nvidia-cuda-runtime-cu12>=12.5,<13"     # only its libcudart.so.12 travels
unzip -q -o -j "$WORK"/nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' -d "$DEST/stubs"
mkdir -p "$WORK/site" && (cd "$WORK/site" && unzip -q ../tensorflow-2.21.0-*.whl)
rm -rf "$WORK/site/tensorflow/include"            # C++ headers, unused at run time
tar -C "$WORK/site" -cf - . | zstd -19 -T0 --long=31 -q -o "$WORK/tf.tar.zst"
split -b 61M -d "$WORK/tf.tar.zst" "$DEST/part_"
sha256sum "$WORK/tf.tar.zst" | cut -d' ' -f1 > "$DEST/tf.sha256"
for so in libcufft.so.11 libcusolver.so.11 libcusparse.so.12; do
  echo 'void tfseg_gpu_stub(void) {}' | gcc -shared -fPIC -x c - -o "$DEST/stubs/$so" -Wl,-soname,$so
done
cp "$HERE"/stash.sh "$HERE"/setup.sh "$DEST/"
rm -rf "$WORK"; du -sh "$DEST"/*
