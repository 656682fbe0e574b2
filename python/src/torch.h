/*
 * torch.h — what torch_tensors.c (discovery, the framework, streams) and torch_surface.c (reading a
 * tensor through its Python surface) share.
 */
#ifndef RPY_TORCH_H
#define RPY_TORCH_H

#include "binding.h"

/* Caches what the Python surface needs from the torch module. 0, or -1 with an exception. */
int rpy_torch_surface_init(PyObject *torch);
/* Describes a tensor through its Python surface. 0, or -1 with an exception naming `name`. */
int rpy_torch_read_surface(PyObject *obj, const char *name, rp_tensor *t);
/* Sets t->device to cpu or cuda:N; any other device raises a ValueError naming it. 0 or -1. */
int rpy_torch_read_device(PyObject *obj, const char *name, rp_tensor *t);
/* Replaces the pending exception (torch refused to describe obj) by one naming the argument:
 * an unsupported device or layout, or torch's own message. Returns -1. */
int rpy_torch_explain_refusal(PyObject *obj, const char *name);
/* A tensor a torch.func transform made (grad, vjp, jvp, vmap, functionalize): its memory is not
 * the caller's to read. Raises naming `name` and returns -1 when obj is one; else 0 (cold paths
 * only: it asks torch). */
int rpy_torch_refuse_transform_tensor(PyObject *obj, const char *name);

#endif /* RPY_TORCH_H */
