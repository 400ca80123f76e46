#include "test_util.h"
int main(void) { test_init("test_api"); return test_finish(); }
