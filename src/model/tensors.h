/* tensors.h - (internal to src/model) the list of tensors a Qwen3 checkpoint
 * of a given config holds, in canonical order, with where each one goes in an
 * rf_model. Shared by the loader and the random-init writer so the two can
 * never disagree about names or shapes. */
#ifndef RF_MODEL_TENSORS_H
#define RF_MODEL_TENSORS_H

#include "model/model.h"

typedef struct {
    char name[96];
    int rows, cols;  /* matrix [rows, cols]; a norm vector has shape [rows], cols = 0 */
    rf_mat *mat;     /* destination of a matrix (NULL for vectors) */
    float **vec;     /* destination of a norm vector (NULL for matrices) */
} rf_tspec;

/* m->cfg must be set; allocates m->layers if NULL. lm_head.weight is listed
 * only when the embeddings are untied. *out is malloc'd; returns the count. */
int rf_model_tensor_list(rf_model *m, rf_tspec **out);

#endif
