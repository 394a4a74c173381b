// What the shim's files share: the C ABI's error convention. Every exported function
// returns nullptr on success, or the C++ exception's message (valid until the next call
// on the same thread). A tch Tensor's raw pointer is an `at::Tensor*`.
#pragma once
#include <exception>
#include <string>

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
