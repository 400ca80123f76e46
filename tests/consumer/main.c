/* Uses the installed library the way the README shows. */
#include <ingot/ingot.h>
#include <stdio.h>

int main(void) {
  if (ingot_version_number() / 10000 != INGOT_VERSION_MAJOR) return 1;
  ingot_context_t ctx;
  if (ingot_context_create(INGOT_BACKEND_CPU, 0, &ctx)) {
    fprintf(stderr, "%s\n", ingot_last_error(NULL));
    return 1;
  }
  ingot_ngram_config cfg;
  if (ingot_ngram_config_derive(512, 3, 2, 1000, 1234, 0, 7, &cfg)) return 1;
  int32_t ids[6] = {3, 4, 7, 5, 6, 8}, cu[2] = {0, 6}, context[2] = {7, 7};
  int64_t rows[6 * 4];
  ingot_tensor tids = ingot_tensor_1d(ids, INGOT_DTYPE_I32, 6);
  ingot_tensor tcu = ingot_tensor_1d(cu, INGOT_DTYPE_I32, 2);
  ingot_tensor tctx = ingot_tensor_2d(context, INGOT_DTYPE_I32, 1, 2, 2);
  ingot_tensor trows = ingot_tensor_2d(rows, INGOT_DTYPE_I64, 6, 4, 4);
  if (ingot_ngram_row_ids(ctx, &cfg, &tids, &tcu, &tctx, &trows, NULL)) {
    fprintf(stderr, "%s\n", ingot_last_error(ctx));
    return 1;
  }
  ingot_context_destroy(ctx);
  /* the documented first worked row */
  if (rows[0] != 883 || rows[3] != 3714) return 1;
  printf("consumer ok: ingot %s\n", ingot_version());
  return 0;
}
