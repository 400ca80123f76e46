/*
 * `ingot quantize`: safetensors -> safetensors with NVFP4 weights
 * (tools/quantize.c; the format of its output: docs/quantize.md).
 */
#ifndef INGOT_TOOLS_QUANTIZE_H
#define INGOT_TOOLS_QUANTIZE_H

/* argv[0] is "quantize". Returns 0 on success, 1 on failure (bad input file,
 * I/O, library error), 2 on a usage error or when the program was built
 * without a JSON library. */
int quantize_main(int argc, char **argv);

#endif /* INGOT_TOOLS_QUANTIZE_H */
