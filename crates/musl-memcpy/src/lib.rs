//! `memcpy` and `memmove` for the node proxy's static musl build on x86_64.
//!
//! musl's x86_64 `memcpy` copies with `rep movsq` and then byte by byte,
//! whatever the size. Most copies on the proxy's data path are small: the
//! partial AES block of every record ring seals or opens (up to 15 bytes,
//! twice per record), a record's plaintext (a few hundred bytes). For those
//! `rep movsq`'s start-up and the byte loop dominate: memcpy was 4.7 % of
//! the proxy's CPU per keep-alive request, about as much as AES-GCM itself.
//! This one copies up to 64 bytes with overlapping unaligned moves (all
//! loads before any store) and anything longer with `rep movsb`, which CPUs
//! with ERMS (Intel since 2012, AMD since Zen 3) run at full speed, and with
//! FSRM (Intel since Ice Lake) from the first byte.
//!
//! `memmove` comes along because musl's shares code with its `memcpy` (it
//! jumps into it): keeping musl's would pull musl's `memcpy` in too, and
//! two definitions do not link.
//!
//! The symbols are exported only in static musl x86_64 builds, where they
//! take the place of musl's (the linker takes the first definition, and
//! `libc.a`'s objects for them are then never pulled in); everywhere else
//! the libc's stay, and [`copy`] and [`copy_backward`] are functions the
//! tests exercise.
#![no_std]
// Each unsafe block states why it is sound; nothing else here is unsafe.
#![deny(unsafe_op_in_unsafe_fn)]

use core::ptr::{read_unaligned, write_unaligned};

/// Copy `n` bytes from `src` to `dst`, front to back: `memcpy`'s contract,
/// and `memmove`'s when `dst` lies before `src`.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes; if the
/// ranges overlap, `dst` must not lie after `src`.
#[inline(always)]
pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: up to 64 bytes, every access lies within `src[..n]` or
    // `dst[..n]` (the first and last `k` bytes for some `k <= n`, read
    // before anything is written, so an overlap cannot corrupt them);
    // beyond, `rep movsb` moves exactly `n` bytes one after the other from
    // the front (correct when `dst` is before `src`) with the direction
    // flag clear, as the ABI guarantees at every call.
    unsafe {
        if n <= 16 {
            if n >= 8 {
                ends::<u64>(dst, src, n);
            } else if n >= 4 {
                ends::<u32>(dst, src, n);
            } else if n >= 2 {
                ends::<u16>(dst, src, n);
            } else if n == 1 {
                *dst = *src;
            }
        } else if n <= 32 {
            ends::<u128>(dst, src, n);
        } else if n <= 64 {
            let a = read_unaligned(src.cast::<u128>());
            let b = read_unaligned(src.add(16).cast::<u128>());
            let c = read_unaligned(src.add(n - 32).cast::<u128>());
            let d = read_unaligned(src.add(n - 16).cast::<u128>());
            write_unaligned(dst.cast::<u128>(), a);
            write_unaligned(dst.add(16).cast::<u128>(), b);
            write_unaligned(dst.add(n - 32).cast::<u128>(), c);
            write_unaligned(dst.add(n - 16).cast::<u128>(), d);
        } else {
            rep_movsb(dst, src, n);
        }
    }
}

/// Copy `n` bytes from `src` to `dst` where `dst` lies after `src` and the
/// ranges overlap: `memmove`'s other case.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `n` bytes.
#[inline(always)]
pub unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    if n <= 64 {
        // SAFETY: `copy` reads everything before writing up to 64 bytes.
        unsafe { copy(dst, src, n) }
    } else {
        // SAFETY: moves exactly `n` bytes from the back, so every byte is
        // read before the copy overwrites it; the direction flag is set
        // only for this instruction and cleared again, as the ABI wants.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            core::arch::asm!(
                "std",
                "rep movsb",
                "cld",
                inout("rcx") n => _,
                inout("rdi") dst.add(n - 1) => _,
                inout("rsi") src.add(n - 1) => _,
                options(nostack),
            );
        }
        // SAFETY: the caller's contract is `copy`'s (overlap allowed).
        #[cfg(not(target_arch = "x86_64"))]
        unsafe {
            core::ptr::copy(src, dst, n)
        }
    }
}

/// With `k = size_of::<T>()` and `k <= n <= 2k`: copy bytes `[0, k)` and
/// `[n - k, n)`, which together are all `n`, loading both before storing.
///
/// # Safety
/// As [`copy`], for `n` bytes, and `n >= size_of::<T>()`.
#[inline(always)]
unsafe fn ends<T: Copy>(dst: *mut u8, src: *const u8, n: usize) {
    let k = size_of::<T>();
    // SAFETY: the caller guarantees `k <= n` bytes are valid at both ends.
    unsafe {
        let head = read_unaligned(src.cast::<T>());
        let tail = read_unaligned(src.add(n - k).cast::<T>());
        write_unaligned(dst.cast::<T>(), head);
        write_unaligned(dst.add(n - k).cast::<T>(), tail);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn rep_movsb(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: moves exactly `n` bytes from `src` to `dst` (the caller's
    // contract); touches no stack and no flags.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn rep_movsb(dst: *mut u8, src: *const u8, n: usize) {
    // SAFETY: the caller's contract is `copy`'s.
    unsafe { core::ptr::copy(src, dst, n) }
}

/// C's `memcpy`, in static musl x86_64 builds only.
///
/// # Safety
/// C's `memcpy` contract.
#[cfg(all(target_arch = "x86_64", target_env = "musl"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract is stricter than ours.
    unsafe { copy(dst, src, n) };
    dst
}

/// C's `memmove`, in static musl x86_64 builds only.
///
/// # Safety
/// C's `memmove` contract.
#[cfg(all(target_arch = "x86_64", target_env = "musl"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: front to back unless `dst` starts inside `src[..n]`.
    unsafe {
        if (dst as usize).wrapping_sub(src as usize) >= n {
            copy(dst, src, n);
        } else {
            copy_backward(dst, src, n);
        }
    }
    dst
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec::Vec;

    /// Every length from 0 to 600 at every alignment of source and
    /// destination within 16 bytes: the copied bytes match, and no byte
    /// outside the destination range changes.
    #[test]
    fn copies_exactly_n_bytes() {
        let src: Vec<u8> = (0..700u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in 0..=600 {
            for so in 0..16 {
                for d_off in [0, 1, 7, 8, 15] {
                    let mut dst = std::vec![0xAAu8; 700];
                    // SAFETY: both ranges lie within their vectors and the
                    // vectors are distinct.
                    unsafe { super::copy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(so), n) };
                    assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "n={n}: before");
                    assert_eq!(&dst[d_off..d_off + n], &src[so..so + n], "n={n} so={so}");
                    assert!(dst[d_off + n..].iter().all(|&b| b == 0xAA), "n={n}: after");
                }
            }
        }
    }

    /// Overlapping moves, as `memmove` makes them: front to back when the
    /// destination comes first, back to front when it comes after.
    #[test]
    fn moves_overlapping_ranges() {
        let orig: Vec<u8> = (0..800u32).map(|i| (i * 13 + 5) as u8).collect();
        for n in 0..=300 {
            for shift in [1usize, 7, 16, 33, 64, 65, 200] {
                let mut fwd = orig.clone();
                let mut expect = orig.clone();
                expect.copy_within(shift..shift + n, 0);
                // SAFETY: both ranges lie within the vector; the
                // destination comes first.
                unsafe { super::copy(fwd.as_mut_ptr(), fwd.as_ptr().add(shift), n) };
                assert_eq!(fwd, expect, "forward n={n} shift={shift}");

                let mut back = orig.clone();
                let mut expect = orig.clone();
                expect.copy_within(0..n, shift);
                // SAFETY: both ranges lie within the vector.
                unsafe { super::copy_backward(back.as_mut_ptr().add(shift), back.as_ptr(), n) };
                assert_eq!(back, expect, "backward n={n} shift={shift}");
            }
        }
    }
}
