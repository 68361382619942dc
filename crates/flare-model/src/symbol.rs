//! Short names for demangled C++ symbols, for people to read.
//!
//! A GPU trace names its kernels by their demangled C++ signature: PyTorch's elementwise
//! and reduction kernels run to 300-600 characters of templates, lambdas and parameter
//! lists, and the words that tell one from another (`threshold_kernel_impl`,
//! `sum_functor`, a CUTLASS configuration) sit deep inside. Dropping every template
//! argument, as Holistic Trace Analysis does, leaves `vectorized_elementwise_kernel` for a
//! dozen different kernels. [`short_symbol`] keeps the function's own name, its leading
//! numeric template arguments (vector width, block size) and the first two specific names
//! among its template arguments; the documents keep the full name, so this is display only.

use std::borrow::Cow;

/// Names inside template arguments that say nothing of what the kernel does: types,
/// namespaces' generic wrappers, iterator plumbing.
const GENERIC: &[&str] = &[
    "AUnaryFunctor",
    "BFloat16",
    "BUnaryFunctor",
    "BinaryFunctor",
    "ClampLimits",
    "Half",
    "LoadWithCast",
    "LoadWithoutCast",
    "OffsetCalculator",
    "ReduceOp",
    "Scalar",
    "StoreWithCast",
    "StoreWithoutCast",
    "TensorIterator",
    "TensorIteratorBase",
    "TensorListMetadata",
    "TrivialOffsetCalculator",
    "UnaryFunctor",
    "array",
    "bool",
    "char",
    "complex",
    "const",
    "divides",
    "double",
    "false",
    "float",
    "func_wrapper_t",
    "gpu_kernel_impl",
    "gpu_kernel_impl_nocast",
    "half",
    "int",
    "int32_t",
    "int64_t",
    "lambda",
    "long",
    "minus",
    "multiplies",
    "operator",
    "plus",
    "short",
    "signed",
    "size_t",
    "true",
    "uint8_t",
    "unsigned",
    "void",
];

/// How many specific names from the template arguments a short name keeps.
const KEPT_NAMES: usize = 2;

/// Whether `name` reads as a demangled C++ symbol with templates or parameters (a Python
/// frame such as `train.py(88): step` or an op with shapes is not one).
fn is_cpp_symbol(name: &str) -> bool {
    (name.contains('<') || name.contains('('))
        && (name.contains("::") || name.starts_with("void "))
        && !name.contains(".py(")
}

/// A readable name for a demangled C++ symbol: `vectorized_elementwise_kernel<8>
/// [threshold_kernel_impl]` for a 400-character PyTorch kernel signature. Anything that is
/// not such a symbol comes back as it is.
pub fn short_symbol(name: &str) -> Cow<'_, str> {
    if !is_cpp_symbol(name) {
        return Cow::Borrowed(name);
    }
    let name = name
        .trim_start_matches("void ")
        .replace("(anonymous namespace)::", "");
    // The function's qualified name ends at its template arguments or its parameters.
    let head_end = name.find(['<', '(']).unwrap_or(name.len());
    let base = name[..head_end].rsplit("::").next().unwrap_or("").trim();
    let mut out = base.to_string();
    if name[head_end..].starts_with('<') {
        let targs = template_arguments(&name[head_end + 1..]);
        let numbers = leading_numbers(targs);
        if !numbers.is_empty() {
            out.push_str(&format!("<{}>", numbers.join(", ")));
        }
        let specific = specific_names(targs);
        if !specific.is_empty() {
            out.push_str(&format!(" [{}]", specific.join(", ")));
        }
    }
    if out.is_empty() {
        return Cow::Owned(name);
    }
    Cow::Owned(out)
}

/// The text of a template argument list, from just after its `<` to its matching `>` (or
/// the end, for a truncated name).
fn template_arguments(s: &str) -> &str {
    let mut depth = 1usize;
    for (i, c) in s.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    return &s[..i];
                }
            }
            _ => {}
        }
    }
    s
}

/// The template's first arguments while they are plain numbers (`8`, `128, 4`).
fn leading_numbers(targs: &str) -> Vec<&str> {
    targs
        .split(',')
        .map(str::trim)
        .take_while(|a| !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric()))
        .take_while(|a| a.starts_with(|c: char| c.is_ascii_digit()))
        .collect()
}

/// The first distinct names in template arguments that are neither namespaces nor
/// generic (types, wrappers), outside parameter lists and lambda bodies.
fn specific_names(targs: &str) -> Vec<&str> {
    let bytes = targs.as_bytes();
    let (mut paren, mut brace) = (0usize, 0usize);
    let mut names: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < bytes.len() && names.len() < KEPT_NAMES {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &targs[start..i];
            let qualifier = targs[i..].starts_with("::");
            if paren == 0
                && brace == 0
                && !qualifier
                && !word.starts_with(|c: char| c.is_ascii_digit())
                && !GENERIC.contains(&word)
                && !names.contains(&word)
            {
                names.push(word);
            }
            continue;
        }
        match c {
            b'(' => paren += 1,
            b')' => paren = paren.saturating_sub(1),
            b'{' => brace += 1,
            b'}' => brace = brace.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    names
}

#[cfg(test)]
mod tests {
    use super::short_symbol;

    #[test]
    fn kernel_signatures_read_as_what_they_do() {
        // Kernel names as a real H100 trace (PyTorch 2.11, CUDA 13) wrote them.
        let cases = [
            (
                "void at::native::vectorized_elementwise_kernel<8, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}>, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::(anonymous namespace)::threshold_kernel_impl<c10::BFloat16>(at::TensorIteratorBase&, c10::BFloat16, c10::BFloat16)::{lambda(c10::BFloat16, c10::BFloat16)#1}>, std::array<char*, 3ul>)",
                "vectorized_elementwise_kernel<8> [threshold_kernel_impl]",
            ),
            (
                "void at::native::reduce_kernel<128, 4, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 8> >(at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<c10::BFloat16, at::native::sum_functor<c10::BFloat16, float, c10::BFloat16>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4, 8>)",
                "reduce_kernel<128, 4> [sum_functor]",
            ),
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul>)",
                "vectorized_elementwise_kernel<4> [MulFunctor]",
            ),
            (
                "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>, 4, TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)",
                "unrolled_elementwise_kernel [direct_copy_kernel_cuda]",
            ),
            (
                "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<2>, at::native::(anonymous namespace)::BinaryOpListAlphaFunctor<float, 2, 2, 0>, std::plus<float>, float)",
                "multi_tensor_apply_kernel [BinaryOpListAlphaFunctor]",
            ),
            (
                "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nt_align2>(cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nt_align2::Params)",
                "Kernel2 [cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nt_align2]",
            ),
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
                "vectorized_elementwise_kernel<4> [FillFunctor]",
            ),
            // A name cut off in the middle of its templates still reads.
            (
                "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float",
                "reduce_kernel<512, 1> [MeanOps]",
            ),
            // Not templated C++: as they are.
            (
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
                "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT",
            ),
            (
                "aten::addmm [[4094],[4096,4094],[4094,4094],[],[]]",
                "aten::addmm [[4094],[4096,4094],[4094,4094],[],[]]",
            ),
            ("regressions.py(159): run_variant", "regressions.py(159): run_variant"),
            (
                "autograd::engine::evaluate_function: AddmmBackward0",
                "autograd::engine::evaluate_function: AddmmBackward0",
            ),
            ("all_reduce 16.0 MiB", "all_reduce 16.0 MiB"),
        ];
        for (full, short) in cases {
            assert_eq!(short_symbol(full), short, "{full}");
        }
    }

    #[test]
    fn nccl_kernels_keep_their_name_without_parameters() {
        assert_eq!(
            short_symbol(
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
            ),
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "no '::': not read as a templated symbol"
        );
        assert_eq!(
            short_symbol("void ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            "ncclDevKernel_AllGather_RING_LL"
        );
    }

    proptest::proptest! {
        /// Kernel names come from other programs: any text, cut anywhere.
        #[test]
        fn any_name_gets_a_short_one_without_panicking(name in "\\PC{0,300}") {
            let short = short_symbol(&name);
            proptest::prop_assert!(name.is_empty() || !short.is_empty());
        }

        #[test]
        fn signature_like_names_get_a_short_one(name in "(void )?[a-zA-Z_:<>(){}, 0-9#&*]{1,200}") {
            proptest::prop_assert!(!short_symbol(&name).is_empty());
        }
    }

    #[test]
    fn odd_input_never_panics_and_never_comes_back_empty() {
        for s in [
            "void <",
            "void ::(",
            "a::<<<>>>(",
            "void ()",
            "x::y<",
            "void é::ü<ö>(ä)",
        ] {
            assert!(!short_symbol(s).is_empty(), "{s}");
        }
    }
}
