/*
 * `ingot ple`: the n-gram (PLE) table of a checkpoint (ple_cli.c); the entry
 * point that ingot_main.c calls.
 *
 * Trust: argv is the user's command line; nothing in it is trusted beyond
 * being NUL-terminated strings. The files are checked by the library.
 */
#ifndef INGOT_TOOLS_PLE_CLI_H
#define INGOT_TOOLS_PLE_CLI_H

/* argv[0] is "ple", argv[1] the action ("load"). Returns 0 on success, 1 on
 * failure (bad files, I/O, allocation), 2 on a usage error. */
int ple_main(int argc, char **argv);

#endif /* INGOT_TOOLS_PLE_CLI_H */
