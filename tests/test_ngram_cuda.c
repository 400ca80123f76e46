#include "test_util.h"
int main(void) { test_init("test_ngram_cuda"); return test_finish(); }
