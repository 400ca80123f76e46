#include "test_util.h"
int main(void) { test_init("test_ngram"); return test_finish(); }
