// What the shim's files share: the C ABI's error convention. Every exported function
// returns nullptr on success, or the C++ exception's message (valid until the next call
// on the same thread). A tch Tensor's raw pointer is an `at::Tensor*`.
#pragma once
#include <ATen/core/Tensor.h>
#include <exception>
#include <string>
#include <vector>

inline thread_local std::string pipeline_last_error;

// Runs `body`; returns nullptr, or the message of what it threw.
template <typename F>
const char* pipeline_guard(F body) {
  try {
    body();
    return nullptr;
  } catch (const std::exception& e) {
    pipeline_last_error = e.what();
  } catch (...) {
    pipeline_last_error = "unknown C++ exception";
  }
  return pipeline_last_error.c_str();
}

// The tensors behind `n` raw pointers (shallow copies that share storage).
inline std::vector<at::Tensor> pipeline_gather(at::Tensor** tensors, size_t n) {
  std::vector<at::Tensor> out;
  out.reserve(n);
  for (size_t i = 0; i < n; i++) out.push_back(*tensors[i]);
  return out;
}
