{
  description = "fp8-decode-kernels: fused FP8 RMSNorm, SwiGLU and skinny-GEMM decode kernels for the Kernel Hub";

  inputs = {
    kernel-builder.url = "github:huggingface/kernels";
  };

  outputs =
    { self, kernel-builder, ... }:
    kernel-builder.lib.genKernelFlakeOutputs {
      inherit self;
      path = ./.;
      # tests/test_llama_kernelize.py (in the kernels_ci subset) builds a tiny Llama with transformers.
      pythonCheckInputs = pkgs: with pkgs; [ transformers ];
    };
}
